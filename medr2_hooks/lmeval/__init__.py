"""Hooks that lm-eval task YAMLs in ``tasks/`` call with ``!function medr2_hooks.lmeval.<module>.<fn>``."""
