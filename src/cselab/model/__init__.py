"""The embedding model and its modules (:mod:`cselab.model.embedding`): the one inference path of cselab.

Every file here imports only torch, transformers, safetensors, peft and its siblings (relatively), so that an
exported folder can ship them (``cselab.export``); loading backbones by name is :mod:`cselab.model.loading`.
"""
