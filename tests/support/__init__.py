"""What the tests share beside the servers (``tests.harness``): waiting for
a state no frame announces (``waiting``), and reading what the log and the
runs say (``log``). One copy of each, used everywhere."""
