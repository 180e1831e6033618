"""The HTTP edges: the upstream client, byte relays, error answers and guards, the upstream's token counter and context overflow."""
