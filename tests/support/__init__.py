"""What the tests share beside the servers (``tests.harness``), one copy of
each, used everywhere: waiting for a state no frame announces
(``waiting``), the clients (``clients``: a socket, an HTTP GET), sessions
over a socket (``sessions``), reading what the log and the runs say
(``log``), and the agent rig (``rig``: runs held until the test releases
them)."""
