"""The torch-free core: what an experiment is and what its results are.

``config`` and ``experiment`` (the typed experiment file), ``overrides`` and ``load`` (reading
it), ``plan`` (content-hashed run specs per stage), ``stability`` (the one stability criterion:
divergence, collapse to the unigram floor, brackets) and ``store`` / ``folders`` (the results
folder: every file name, path and atomic write). Nothing here imports torch or Lightning, so
validating, planning and reading results stay fast.
"""
