"""inferd's OpenAI-compatible frontend: the OpenAI API over decoupled text models."""
