"""What an answer means and what to do about it: the answer table and the one retry policy."""
