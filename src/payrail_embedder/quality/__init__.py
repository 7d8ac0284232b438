"""Search's quality, measured and moved: labelled queries through search (evaluation), every golden
query ranked at once and an edit's or a restore's effect on them, exact ranks, the Quality page's
report, and tuning the local model on golden queries."""
