"""Examples: a Hugging Face model factory and a plain PyTorch loop using ``Preemptible``."""
