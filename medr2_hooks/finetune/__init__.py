"""Full-parameter supervised fine-tuning, the paper's fine-tuning baseline (§4.2, C.2), with accelerate.

``accelerate launch --config_file finetune/accelerate/<cfg>.yaml -m medr2_hooks.finetune <recipe.yaml>``
(or ``medr2 finetune <recipe>`` in one process). The recipe (``recipe.py``) declares the model, the training
items and the evaluation slice they must not overlap; ``examples.py`` turns items into prompt/answer token
rows (loss on the answer tokens only); ``train.py`` runs the loop with checkpoints that resume exactly.
The finished checkpoint carries ``medr2_training.json`` (trained item ids, cost) and is evaluated by the
``*_direct`` tasks, which refuse to score any item it was trained on.
"""
