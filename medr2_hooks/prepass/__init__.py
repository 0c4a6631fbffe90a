"""The pre-pass of a retrieval task: the method's stages over every item of the task, before the target answers.

- :mod:`.spec` — what determines a task's pre-pass (:class:`~.spec.PrepassSpec`: benchmark, items, resolved
  method config, role models, index) and the content hash that names its record and packs;
- :mod:`.packs` — running it (:func:`~.packs.run_prepass`) and its packs as an artifact (written atomically with
  their sha256, read back only for the exact spec; under ``accelerate launch`` rank 0 makes them);
- :mod:`.prepare` — ``medr2 prepare``: pre-passes in their own process before any target model loads, sharded
  over Slurm array tasks or Ray workers, each shard writing its own stage-cache segment, then assembled.

"Prepare" means one thing: making a task's packs ahead of the evaluation. The lm-eval hook
(:mod:`medr2_hooks.lmeval.retrieval`) only reads them, or makes them in-process when nothing was prepared.
"""
