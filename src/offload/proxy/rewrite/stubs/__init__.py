"""The proxy's stubs: making them (:mod:`.message_stubs`) and reading a wire back (:mod:`.expand`)."""
