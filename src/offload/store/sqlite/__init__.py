"""The SQLite file: opening it, its schema and migrations (frozen with each migration)."""
