"""Bridges to other tools (MLflow, Lightning, Hugging Face): each imports its library only when used."""
