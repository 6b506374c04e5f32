"""Figures: matplotlib drawings of the runs and the judgements, one module per figure; `style` holds
what they share (palette, figure sizes, saving) and `forest` the interval plot of speed and claims."""
