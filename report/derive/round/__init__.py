"""A round's ledger from its bundle: the round read (`read`), its raw inputs (`raw`), its phases resolved (`stages`)."""
