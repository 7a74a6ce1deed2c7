"""The small corpus and questions every adapter test uses."""

TEXTS = [
    "Mary went to the kitchen.", "John picked up the apple.", "Mary took the milk there.",
    "Sandra travelled to the office.", "John went to the garden.", "Daniel dropped the football.",
    "The milk is in the fridge.", "Sandra grabbed the ball.", "Daniel journeyed to the bedroom.",
    "Mary left the milk.", "John moved to the hallway.", "The apple is red.",
]
QUESTIONS = ["Where is the milk?", "Where is the apple?", "Who has the ball?", "Where is Daniel?"]
