"""Commands over the store's entries: add, ls, search, show, cat, pin, forget, reap, stats; doctor, export, import; store migrate."""
