"""The proof on a real model: compress all-MiniLM-L6-v2 (or our Llama-style decoder), align with
GAC against this CPU's measured profile, build every variant, and measure quality and prefill
(and decode) latency in paired rounds with bootstrap CIs (`gac proof`)."""
