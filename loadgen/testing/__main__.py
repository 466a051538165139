"""``python -m loadgen.testing``: serve the scripted test server on a port."""

from loadgen.testing.server import main

main()
