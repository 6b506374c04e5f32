"""Words: sentences written from the judgements (the headline, the study's section and setting). A
sentence reads a judgement's word and reason; it never decides one."""
