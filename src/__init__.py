"""normsweep: which normalization layer should your GPT train with?"""
