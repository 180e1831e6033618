"""What a put writes: blocks, chunks and their index, rows, vectors, the write transaction."""
