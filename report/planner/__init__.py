"""The capacity planner (`serving-ledger explain`): the architecture's theory without a bundle. Imports
`architecture` and the ledger's types only.
"""
