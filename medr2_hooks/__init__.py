"""Med-R² evidence-based-medicine retrieval augmentation as lm-evaluation-harness hooks.

Importing this package is cheap: heavy dependencies (torch, transformers, faiss, lm-eval) are imported
only by the modules that use them, through the registry in :mod:`medr2_hooks.registry`.
"""

__version__ = "0.1.0"
