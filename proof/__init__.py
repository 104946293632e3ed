"""The proof on a real model: compress all-MiniLM-L6-v2 (or our Llama-style decoder, small or at
Llama-3-8B's dimensions) with ASVD, MLP pruning or PaLU, align with GAC against the measured profile
of the device it runs on (this CPU, or a CUDA GPU), build every variant, and measure quality and
prefill (and decode) latency in paired rounds with bootstrap CIs (`gac proof`)."""
