"""The proxy's own memory tools, offered to the upstream model, and the loop that answers the model's calls of them."""
