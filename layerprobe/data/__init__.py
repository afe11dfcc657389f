"""Text in: corpora packed into token windows with an exact budget, local files, SQuAD questions."""
