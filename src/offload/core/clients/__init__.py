"""What ``offload setup`` writes into each agent client's config and takes out again: the clients' table, their config formats edited as text (pure, no I/O)."""
