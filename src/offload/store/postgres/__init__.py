"""The PostgreSQL store: its connection (the other side of backend.Conn), schema, statements and bulk paths."""
