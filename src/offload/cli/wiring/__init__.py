"""Commands that wire agent clients to offload and report on them: ``setup``, ``status``, and the client config files they read and write."""
