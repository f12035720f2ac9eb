"""The words that state a value of a kind (``asked_value``): numbers, sums, durations, times, days and
colours in words, the units after a number that make it no sum, and the capitalised words that are no
one's name. Word lists, kept apart from the rules that read them."""

from __future__ import annotations

from engram.text import LINE_LABELS


def words_of(text: str) -> frozenset[str]:
    """A word list written as text: ``"at in near"`` -> {"at", "in", "near"}."""
    return frozenset(text.split())


MONEY_SUFFIXES = frozenset(
    "k m bn ish pcm pw pa pp p grand quid bucks rs eur usd gbp aud sgd nzd chf nok kr ghs".split()  # noqa: SIM905
)
NOT_A_SUM_NEXT = frozenset(
    """
    am pm % percent km kg g cm mm m miles mph kmh mins min minutes hours hrs hr days weeks months years yrs
    times people kids jan feb mar apr may jun jul aug sep sept oct nov dec january february march april june
    july august september october november december
    covers guests children dogs cats hens chooks chickens pages rooms bedrooms seats items boxes bottles
    pieces reps sets steps students pupils members players friends followers likes calories lbs stone
    litres metres feet inches
    """.split()  # noqa: SIM905 - things counted: "40 covers" (a list: any plural would take "300 shekels")
)
# Capitalised or possessive, yet no one's name: the agent's word for the user, family as it is
# addressed ("mum's coming"), contractions ("let's", "today's"); and a line's label (text.LINE_LABELS:
# "Update:", "Sorry", weekdays, months that are no first names).
NOT_NAMES = LINE_LABELS | words_of(
    """
    user users let everything everyone everybody nothing nobody somebody someone something tonight
    mondays tuesdays wednesdays thursdays fridays saturdays sundays several many few another such maybe
    perhaps however hopefully luckily sadly honestly thanks please yes yeah hi hello hey dear
    life mum mom mam mummy mommy dad daddy mother father nan nana gran granny grandma grandad grandpa
    """
)
NUMBER_WORDS = words_of(
    """
    zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen
    seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand
    million billion hundreds thousands millions dozens dozen half quarter couple few several both double
    twice once single pair twins triplets none only grand quid bucks tenner fiver
    first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth
    fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth twentieth thirtieth
    """
)
# ... or in words: "fifty quid", "a hundred and twenty", "twelve pounds", "it was free" (not "two-bedroom")
MONEY_WORDS = words_of(
    """
    twenty thirty forty fifty sixty seventy eighty ninety hundred hundreds thousand thousands million
    millions billion grand quid bucks tenner fiver free nothing pounds pound dollars dollar euros euro cents
    pence kroner krone rupees pesos cedis cedi reais rand yen francs baht ringgit dirhams shillings rubles
    roubles dinars riyals zlotys lira half figures
    """
)
DURATION_WORDS = words_of(
    """
    year years month months week weeks day days decade decades hour hours minute minutes fortnight
    ages while since teen teens teenager toddler baby newborn twenties thirties forties fifties sixties
    seventies eighties nineties
    """
)
TIME_WORDS = words_of(
    """
    noon midday midnight morning mornings afternoon afternoons evening evenings night nights lunchtime
    lunch early late am pm o'clock dawn sunrise sunset dusk after teatime dinnertime breakfast dinner
    tea supper bedtime tonight
    """
)
DAY_WORDS = words_of(
    """
    monday tuesday wednesday thursday friday saturday sunday mondays tuesdays wednesdays thursdays
    fridays saturdays sundays mon tue tues wed weds thu thur thurs fri sat sun weekday weekdays weekend
    weekends today tomorrow tonight yesterday tmrw tmr tomoz week weeks fortnight fortnightly weekly
    monthly daily yearly annually month months year next
    january february march april may june july august september october november december
    jan feb mar apr jun jul aug sep sept oct nov dec spring summer autumn fall winter
    christmas easter halloween thanksgiving boxing valentine valentine's holiday holidays eid diwali
    hanukkah ramadan passover
    """
)
COLOURS = words_of(
    """
    red blue green yellow black white grey gray silver orange purple pink brown navy gold golden beige
    cream maroon burgundy teal turquoise violet lilac lavender magenta cyan khaki bronze copper tan
    ivory charcoal mint olive scarlet crimson indigo hazel blonde blond brunette redhead ginger auburn
    aqua peach coral sage mustard emerald cobalt champagne rose ruby amber dark light pale bright reddish
    """
)
