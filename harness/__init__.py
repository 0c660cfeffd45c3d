"""The harness: what drives the product packages from outside for the demo, the soak, the end-to-end
benchmarks and the tests -- stack control (trainer + monitor subprocesses), the chat-robot stand-ins,
the demo and the soak. It may import ``verl``, ``monitor`` and ``alerting``; none of them imports it."""
