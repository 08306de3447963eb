"""botgateway's core: from a chat question to one progressively streamed card.

The core owns its contracts (:mod:`botgateway.sink`, :mod:`botgateway.events`,
:mod:`botgateway.snapshot`, :mod:`botgateway.messages`, the Store protocol in
:mod:`botgateway.stores`); the platform adapters (``adapters``) and the tools
(``tools``) import them, never the reverse. Only the composition root,
:mod:`botgateway.cli`, wires the three together.
"""
