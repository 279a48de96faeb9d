"""Real models through kvcache: SmolLM2-135M-Instruct from its GGUF, a Llama forward pass in
numpy whose every layer's K/V and attention go through a kvcache Cache."""
