"""A module no test imports but ``test_warmup``: its presence in a worker's ``sys.modules``
shows that the warm-up imported it there."""

IMPORTED = True
