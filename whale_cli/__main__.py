"""``python -m whale_cli …``: the same as the ``whale`` console script."""

from whale_cli.app import main

main()
