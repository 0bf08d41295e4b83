"""The GPT decoder (gpt), its settings (settings), the views of it a coarse model or a sub-path is
(views), and the memory it needs (memory)."""
