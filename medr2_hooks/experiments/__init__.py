"""The paper's experiments as configs: ``config`` (typed YAML), ``expand`` (configs → runs), ``sweep`` (run them
in cache-friendly order, resumable, failures recorded), ``stats`` (paired bootstrap and McNemar)."""
