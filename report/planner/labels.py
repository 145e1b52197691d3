"""The capacity planner's words in English and Chinese: value labels, section titles and notes.

The texts live in the catalogue (report/data/words/label.*.toml). A note is a code plus
fields; `NOTES[lang][code]` is its sentence. The planner decides which
notes apply (report.planner.notes); this module only says them. Chinese text uses full-width
punctuation.
"""

from __future__ import annotations

from report.words import LANGS, group

# Value labels and section titles (`label.plan_*`), and the notes' sentences (`label.note_*`).
LABELS = {lang: group("label.plan_", lang) for lang in LANGS}
NOTES = {lang: group("label.note_", lang) for lang in LANGS}
