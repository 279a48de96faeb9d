"""The accuracy experiments on SmolLM2-135M-Instruct (python -m kvcache_lab.eval): what each storage
format costs (formats.py) and what each mask and eviction policy costs over a long stream
(masks.py). scoring.py holds what both compute from log-probabilities."""
