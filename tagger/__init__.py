"""BiRNN-CRF sequence taggers (flair) whose recurrent layer is a cell found by `nas` search."""
