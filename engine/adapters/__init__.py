"""LoRA and DoRA adapters served per request, many adapters in one batch.

    paths.py    where an adapter directory lies (inside --adapter-root), what clients see of it
    source.py   an adapter directory as mlx_lm.lora writes it, checked before it loads
    safetensors.py  its weights file's header, read by hand; arrays from bytes in memory
    reads.py    the threads adapter files are read on (never the loop's, never the engine's)
    fit.py      whether it fits the base model; its weights per target layer
    layers.py   linear layers that add each row's low-rank delta (LayerStack)
    routing.py  which adapter each row of a forward uses (per-row scale masks)
    bank.py     the loaded adapters of a model, on its engine thread
    catalog.py  the event loop's view: names, users, least recently used
    control.py  load, unload, list and per-request leases, from the event loop
    info.py     AdapterInfo, what clients see of a loaded adapter
"""
