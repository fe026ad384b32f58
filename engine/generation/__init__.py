"""Text generation. The asyncio facade (``engine``, with the request's checks, prompt
encoding and streams) talks to the engine thread (``scheduling``) by typed messages;
the thread prefills (``prefill``), decodes (``decode``), samples (``sampling``) and
delivers (``sequence``), with ``speculation`` and ``grammar`` inside the step."""
