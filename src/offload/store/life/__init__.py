"""An entry's life after put and the whole store's: checkout, pins, reaping, forgetting, tombstones, doctor, health, archives, migration to another backend."""
