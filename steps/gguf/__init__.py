"""GGUF: llama.cpp's converter and quantiser, the quantisation types, the GGUF's metadata, and the parity checks that
prove a GGUF is the model that was trained. Imports only `core` and the serving contract.
"""
