"""What the HTTP surfaces share (pure, no I/O of their own): the bearer-token and body-size
guards as ASGI wrappers, where a server listens and what names it answers to, and
server-sent events decoding."""
