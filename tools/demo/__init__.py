"""The offline demo model and the scripted OpenAI-compatible server it runs on (see :mod:`tools.demo.model`)."""
