"""Tools that read what runs wrote: compare (the verdict), sample and export (the weights)."""
