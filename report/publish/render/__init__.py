"""Render one RoundReport in one language to a self-contained HTML page or a PDF, by topic:
`templating` (the templates and a section's source), `text` (placeholders, markdown, the
spacing of Chinese text), `vega` (figures: embedded specs, SVG), `page` (a round's sections
rendered once), `assembly` (a page resolved for one mode), `appendix` (the provenance of
every number), `pdf` (fonts and the PDF), `output` (a round's pages written and timed)."""
