"""normsweep: which normalization layer should your GPT train with?"""

import os

# Back large CPU tensors with transparent huge pages (read by PyTorch's CPU allocator at its first
# allocation, so it is set before torch is imported). GPT-2's logits (batch x context x 50,257
# floats) are far above glibc's 32 MiB mmap cap: without this every step maps them afresh and
# page-faults 4 KiB at a time; measured ~1.6x faster CPU training here. THP_MEM_ALLOC_ENABLE=0 opts out.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
