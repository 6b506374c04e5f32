"""Words: sentences written from the judgements (the headline; the speed check's section, `speed`; the
study's section, `study`, and its setting beside the study's, `study_setting`). A sentence reads a
judgement's word and reason; it never decides one."""
