"""Programs that an arm runs as a file (``sys.executable <file> --serve``) in the target's worktree.

Run as a file, a program's folder becomes ``sys.path[0]`` of the arm's process. This folder therefore
holds nothing but such programs: a module beside them would shadow any importable module of the same
name (``kgate/measure/profile.py`` would hide the standard library's ``profile``, which ``cProfile``
imports). :mod:`kgate.measure.harness.train_throughput` is the model stage's training harness.
"""
