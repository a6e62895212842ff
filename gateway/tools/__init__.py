"""Tool guards, both ways: which tools a request may offer, which calls a model may make and
where their arguments may point, and how much tool output goes back to the model.

They act only when the request carries a policy decision (`exchange.decision`).
"""
