"""kvcache's lab, beside the package and not in its wheel: the reference model it measures with
(SmolLM2 from GGUF, a NumPy Llama on kvcache's pages, `kvcache_lab.models`) and the accuracy
harness (`kvcache_lab.eval`, docs/accuracy.md). The tests and the docs' commands run them from
the build tree (PYTHONPATH=build/python)."""
