"""GGUF: llama.cpp's converter and quantiser (`conversion`), the quantisation types (`quants`), the parity check's
settings (`settings`) and checks (`parity`, `tokenizer_parity`) that prove a GGUF is the model that was trained, the
GGUF's metadata (`meta`), and convert-gguf's report (`report`). Imports only `core` and the serving contract.
"""
