"""The served call: one tool call as every host serves it (the live text with
its loss markers, the model's text, the loss report), written once."""
