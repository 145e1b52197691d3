"""The report's document, figures, pages and site, in both languages. Reads ledgers and verdicts; computes no
number of its own.
"""
