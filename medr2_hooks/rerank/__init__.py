"""Evidence appraisal: coarse rerank (relevance) then fine rerank (Eq. 1: credibility, genre fit, usefulness)."""
