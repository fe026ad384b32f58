"""Models at run time: where a model may come from, the catalog of on-demand models, and
the residency that loads, keeps alive and unloads them within one memory limit."""
